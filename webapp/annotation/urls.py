app_name = "annotation"

urlpatterns: list = []
